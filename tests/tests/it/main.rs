mod configure;
mod apply;
mod generate;
mod golden;
mod template;
