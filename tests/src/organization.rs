//! Seeding an AWS Organization in moto: the organization, its units, and member accounts
//! placed in them (moto creates an account at once; it starts under the root).

use aws_config::SdkConfig;
use aws_sdk_organizations::Client;
use aws_sdk_organizations::types::OrganizationFeatureSet;

use crate::estate::EstateError;

/// The organization, managed from moto's own account.
#[derive(Debug, Clone)]
pub struct Organization {
    pub root: String,
    client: Client,
}

impl Organization {
    pub async fn create(sdk: &SdkConfig) -> Result<Organization, EstateError> {
        let client = Client::new(sdk);
        client
            .create_organization()
            .feature_set(OrganizationFeatureSet::All)
            .send()
            .await
            .map_err(|err| EstateError::sdk("CreateOrganization", "", err))?;
        let roots = client
            .list_roots()
            .send()
            .await
            .map_err(|err| EstateError::sdk("ListRoots", "", err))?;
        let root = roots
            .roots()
            .first()
            .and_then(|root| root.id())
            .ok_or_else(|| missing("ListRoots", "a root"))?
            .to_owned();
        Ok(Organization { root, client })
    }

    /// A unit under `parent`; its id.
    pub async fn unit(&self, parent: &str, name: &str) -> Result<String, EstateError> {
        let out = self
            .client
            .create_organizational_unit()
            .parent_id(parent)
            .name(name)
            .send()
            .await
            .map_err(|err| EstateError::sdk("CreateOrganizationalUnit", name, err))?;
        out.organizational_unit()
            .and_then(|unit| unit.id())
            .map(str::to_owned)
            .ok_or_else(|| missing("CreateOrganizationalUnit", name))
    }

    /// A new account, moved into `parent`; its id.
    pub async fn account(&self, name: &str, parent: &str) -> Result<String, EstateError> {
        let out = self
            .client
            .create_account()
            .account_name(name)
            .email(format!("{name}@example.com"))
            .send()
            .await
            .map_err(|err| EstateError::sdk("CreateAccount", name, err))?;
        let id = out
            .create_account_status()
            .and_then(|status| status.account_id())
            .ok_or_else(|| missing("CreateAccount", name))?
            .to_owned();
        if parent != self.root {
            self.client
                .move_account()
                .account_id(&id)
                .source_parent_id(&self.root)
                .destination_parent_id(parent)
                .send()
                .await
                .map_err(|err| EstateError::sdk("MoveAccount", &id, err))?;
        }
        Ok(id)
    }
}

fn missing(operation: &'static str, target: &str) -> EstateError {
    EstateError {
        operation,
        target: target.to_owned(),
        message: "missing from the answer".to_owned(),
    }
}
